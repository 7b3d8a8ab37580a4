#!/usr/bin/env bash
# One 64-rank paced run of 200k requests; py-spy samples worker0, the API, and the leader while it runs.
# usage: profile.sh SRC_DIR OUT_DIR
SRC=$1; OUT=$2; mkdir -p $OUT
cd $SRC
env HF_HUB_OFFLINE=1 PYTHONPATH=. /work/main/.venv/bin/python benchmarks/control_plane.py --requests ${N:-200000} --ranks 64 \
   --out $OUT/cp.jsonl --label profile > $OUT/bench.out 2>&1 &
B=$!
# wait until the first results are written (worker logs "stream:" lines appear late); poll for 'claimed chunk' in logs
for i in $(seq 1 300); do
  sleep 2
  W=$(pgrep -P $B -f 'worker.*--engine echo' | head -1)
  [ -n "$W" ] && grep -q "claimed chunk" $(ls -td /tmp/bs-cp-*/ | grep -v data | head -1)logs/worker0.log 2>/dev/null && break
done
sleep 25
A=$(pgrep -P $B -f ' api' | head -1); S=$(pgrep -P $B -f 'scheduler' | head -1)
echo "bench=$B worker=$W api=$A sched=$S" > $OUT/pids
ps -o pid,args -p $W,$A,$S >> $OUT/pids
/tmp/tools/bin/py-spy record --gil -r 100 -d 20 -p $W -f raw -o $OUT/worker0.txt --threads >/dev/null 2>&1 &
/tmp/tools/bin/py-spy record --gil -r 100 -d 20 -p $A -f raw -o $OUT/api.txt >/dev/null 2>&1 &
top -b -n 3 -d 5 > $OUT/top.txt &
wait %2 %3 %4 2>/dev/null
wait $B
