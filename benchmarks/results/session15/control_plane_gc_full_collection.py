"""How long a full collection takes in a process that imported what an echo worker imports, before and
after gc.freeze() (the worker's start-up heap; no run-time objects)."""
import gc, time
import torch  # noqa: F401  (the worker imports it through core)
import worker.service, worker.engines.echo  # noqa: F401
from core.modelstore import load_tokenizer
from core.config import SMOLLM2, Settings
from core.served import model_paths
tok = load_tokenizer(model_paths(Settings())[SMOLLM2])
def full():
    best = 1e9
    for _ in range(5):
        t = time.process_time(); gc.collect(); best = min(best, time.process_time() - t)
    return best
print("tracked objects", len(gc.get_objects()), "full collection CPU s (best of 5)", round(full(), 4))
gc.freeze()
print("after gc.freeze(): tracked", len(gc.get_objects()), "frozen", gc.get_freeze_count(), "full collection CPU s", round(full(), 4))
