"""Three more 100K-request files from blind_mixes_def's generator (unchanged), in proportions and caps nobody
tuned the planner's finish on, with another seed (20261203):

* mixG: chat-heavy, few short requests: MMLU 4% (cap 256), chats capped at 8192.
* mixH: mixF's kinds plus Azure summaries capped at 128; chats capped at 4096, MMLU at 32.
* mixI: very loose chat caps (16384) and MMLU 20% capped at 16.

Usage: python -m benchmarks.blind_mixes_ghi [--out DIR] [--requests N]
"""
import sys

from benchmarks import blind_mixes_def as mw

mw.SEED = 20261203
CHATS = ("burstgpt", "wildchat", "sharegpt")
mw.MIXES = {
    "mixG": {"share": {"burstgpt": 0.30, "mmlu": 0.04, "openvid": 0.0, "wildchat": 0.33, "sharegpt": 0.33,
                       "azure": 0.0},
             "caps": {**{c: 8192 for c in CHATS}, "mmlu": 256, "openvid": 0, "azure": 0},
             "mmlu_runs": [0.285], "openvid_jobs": 0},
    "mixH": {"share": {"burstgpt": 0.33, "mmlu": 0.12, "openvid": 0.0, "wildchat": 0.25, "sharegpt": 0.25,
                       "azure": 0.05},
             "caps": {**{c: 4096 for c in CHATS}, "mmlu": 32, "openvid": 0, "azure": 128},
             "mmlu_runs": [0.86], "openvid_jobs": 0},
    "mixI": {"share": {"burstgpt": 0.30, "mmlu": 0.20, "openvid": 0.0, "wildchat": 0.25, "sharegpt": 0.25,
                       "azure": 0.0},
             "caps": {**{c: 16384 for c in CHATS}, "mmlu": 16, "openvid": 0, "azure": 0},
             "mmlu_runs": [0.75, 0.675], "openvid_jobs": 0},
}

if __name__ == "__main__":
    mw.main(sys.argv[1:] + ["--only", "mixG,mixH,mixI"])
