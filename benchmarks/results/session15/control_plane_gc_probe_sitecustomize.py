"""Probe (not project code): time each process spends in the cyclic GC, by generation; every full
collection's wall time and duration is listed, so start-up can be told from the run."""
import gc, os, sys, threading, time
_acc = {"t": [0.0, 0.0, 0.0], "n": [0, 0, 0], "start": 0.0, "full": []}
def _cb(phase, info):
    if phase == "start":
        _acc["start"] = time.perf_counter()
    else:
        g = info["generation"]; d = time.perf_counter() - _acc["start"]
        _acc["t"][g] += d; _acc["n"][g] += 1
        if g == 2:
            _acc["full"].append((round(time.time(), 1), round(d, 3)))
gc.callbacks.append(_cb)
_out = os.environ.get("CP5_GC_OUT")
def _dump():
    name = " ".join(sys.argv[-4:])
    while True:
        time.sleep(5)
        with open(f"{_out}/{os.getpid()}.txt", "w") as f:
            f.write(f"{name}\tgc_s={[round(x, 2) for x in _acc['t']]}\tcollections={_acc['n']}\tcpu_s={time.process_time():.1f}\tfull={_acc['full']}\n")
if _out:
    threading.Thread(target=_dump, daemon=True).start()
