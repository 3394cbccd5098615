"""Package data, not a module: the entry point the SageMaker SDK ships for trainer jobs (it always uploads one).

The launcher starts it as `python sagemaker_entry.py --key value ...` with the job's hyperparameters
(docs/contracts.md section 1), so this is `python -m trainer.train --key value ...` inside the image.
"""

import runpy

if __name__ == "__main__":
    runpy.run_module("trainer.train", run_name="__main__", alter_sys=True)
