"""Worker for the data-parallel test: trains one model in the given run folder (run under torchrun)."""

import json
import sys

from tiebias.train.trainer import TrainConfig, train

if __name__ == "__main__":
    run_dir, variant, cfg_json = sys.argv[1], sys.argv[2], sys.argv[3]
    train(run_dir, variant, 0, TrainConfig(**json.loads(cfg_json)), progress=False, device="cpu")
