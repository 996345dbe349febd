# The soak test's project (bench/soak.sh): tight limits, so that faults are quick. Eight
# workers: every pooled instance slot is warm within the first minute, so RSS from minute 2
# on measures leaks rather than slots being touched for the first time.
app_name = "soak"
sandbox = {"memory_mb": 64, "timeout_s": 2, "max_body_bytes": 65536}
server = {"header_timeout_s": 5, "workers": 8}
