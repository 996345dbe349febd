# The soak test's project (bench/soak.sh): tight limits, so that faults are quick.
app_name = "soak"
sandbox = {"memory_mb": 64, "timeout_s": 1, "max_body_bytes": 65536}
server = {"header_timeout_s": 5}
