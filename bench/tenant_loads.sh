# Loads for the benchmarks of a `run --tenants` server (bench/tenants.sh, bench/tenants_pair.sh):
# sourced by them, not run. The tenants are hosts t000.bench, t001.bench, ...

# Write to file $1 a wrk script whose requests rotate over the first $2 tenants' hosts.
write_rotation() {
  cat > "$1" <<LUA
local n, i = $2, 0
request = function()
  i = (i + 1) % n
  return wrk.format("GET", "/", {["Host"] = string.format("t%03d.bench", i)})
end
LUA
}

# wrk -t1 -d$DURATION with the arguments after the first three against port $2, its output in
# file $3, and the CPU time (utime + stime, /proc/PID/stat) of process $1 over it. Prints
# "req/s CPU-ms-per-request non-2xx".
wrk_cpu() {
  local pid="$1" port="$2" out="$3" before after
  shift 3
  before=$(awk '{print $14 + $15}' "/proc/$pid/stat")
  wrk -t1 -d"$DURATION" "$@" "http://127.0.0.1:$port/" > "$out"
  after=$(awk '{print $14 + $15}' "/proc/$pid/stat")
  awk -v t=$((after - before)) -v hz="$(getconf CLK_TCK)" \
    '/requests in/ {q=$1} /Requests\/sec/ {r=$2} /Non-2xx/ {bad=$NF}
     END {printf "%s %.6f %d\n", r, t * 1000 / hz / q, bad}' "$out"
}
