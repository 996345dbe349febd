# Process-tree helpers the benchmarks share (sourced, not run): the pids of a server and its
# descendants (uvicorn's workers), and the CPU time they used, from /proc/PID/stat.

# The pids of a process and all its descendants.
tree() {
  local pids="$1" queue="$1" next p
  while [ -n "$queue" ]; do
    next=""
    for p in $queue; do next="$next $(ps -o pid= --ppid "$p" 2>/dev/null || true)"; done
    queue="$(echo $next)"; pids="$pids $queue"
  done
  echo $pids
}

# utime+stime (ticks) summed over a process tree.
cpu_ticks() {
  local t=0 p f
  for p in $(tree "$1"); do
    f=($(sed 's/^.*) //' /proc/"$p"/stat 2>/dev/null)) || continue
    [ "${#f[@]}" -gt 13 ] || continue
    t=$((t + f[11] + f[12]))   # after "pid (comm) ": utime=11 stime=12
  done
  echo "$t"
}

# Memory (KiB) summed over a process tree: its proportional set size (Pss in
# /proc/PID/smaps_rollup), where a page mapped N times counts 1/N each time. VmRSS would count a
# file page once per mapping: filerouter maps its guest's memory image into every instance.
pss_kib() {
  local t=0 p k
  for p in $(tree "$1"); do
    k="$(awk '/^Pss:/ {print $2}' /proc/"$p"/smaps_rollup 2>/dev/null || true)"
    t=$((t + ${k:-0}))
  done
  echo "$t"
}
