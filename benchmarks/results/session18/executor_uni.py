"""vLLM alone on the plan order: the default (multiproc executor) against distributed_executor_backend=uni."""
import dataclasses, json, sys, time
from pathlib import Path
from benchmarks.engine_orders import load
from core.config import SMOLLM2, Settings
from core.served import model_paths
from worker.engines.vllm import VllmEngine, VllmOptions

@dataclasses.dataclass(frozen=True)
class Uni(VllmOptions):
    def engine_args(self, model_path, model_name):
        return {**super().engine_args(model_path, model_name), "distributed_executor_backend": "uni"}

def main():
    path = model_paths(Settings())[SMOLLM2]
    reqs = load(Path(sys.argv[1]))["plan"]
    for name in sys.argv[2:]:
        engine = VllmEngine(path, SMOLLM2, Uni() if name == "uni" else VllmOptions())
        t = time.perf_counter()
        n = len(list(engine.generate(reqs)))
        s = time.perf_counter() - t
        engine.close()
        print(json.dumps({"executor": name, "seconds": round(s, 2), "results": n}), flush=True)


if __name__ == '__main__':
    main()
