#!/usr/bin/env bash
# On a shared machine, give whatever runs under the benchmark lock (flock /tmp/polyalign-cpu.lock ...) the CPU:
# its threads get nice -19 and so does its scheduler autogroup (with autogroups, a session competes as one
# unit, so a thread's nice alone is not enough). Groups are put back to nice 0 once the lock is released.
# Run in the background: nohup bench/perf/cpu_priority.sh &
descendants() { for c in $(pgrep -P "$1"); do echo "$c"; descendants "$c"; done; }
declare -A boosted  # autogroup -> a pid of that group that outlives the job (the shell that called flock)
while true; do
  declare -A active=()
  for lockpid in $(pgrep -f "^flock /tmp/polyalign-cpu.lock"); do
    children=$(descendants "$lockpid")
    [ -z "$children" ] && continue  # still waiting for the lock
    for pid in $children; do
      for tid in /proc/"$pid"/task/*; do renice -n -19 -p "${tid##*/}" >/dev/null 2>&1; done
      group=$(cut -d' ' -f1 /proc/"$pid"/autogroup 2>/dev/null) || continue
      echo -19 > /proc/"$pid"/autogroup 2>/dev/null
      active[$group]=1
      [ -z "${boosted[$group]:-}" ] && boosted[$group]=$(ps -o ppid= -p "$lockpid" | tr -d ' ')
    done
  done
  for group in "${!boosted[@]}"; do
    if [ -z "${active[$group]:-}" ]; then
      echo 0 > /proc/"${boosted[$group]}"/autogroup 2>/dev/null
      unset "boosted[$group]"
    fi
  done
  unset active
  sleep 5
done
