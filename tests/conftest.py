import os

os.environ.setdefault("NUMBA_CACHE_DIR", os.path.join(os.path.dirname(__file__), "..", ".numba_cache"))
# every compile in the suite verifies the PDG after each pass (timerl.passes.verify)
os.environ.setdefault("TIMERL_VERIFY", "1")
