"""A real serving engine on CPU torch: a transformers Llama, paged KV blocks, block-hash prefix
caching across tenants and a host tier, driving Scheduler / CacheManager plug-ins through the
protocols of ``schedlab.llm.plugins`` (FairCache's and its baselines plug in from
``schedlab.faircache``). Needs torch and transformers (imported on first use)."""

import importlib.util

from schedlab.core.lazy import lazy_exports

for _mod in ("torch", "transformers"):
    if importlib.util.find_spec(_mod) is None:
        raise ImportError(f"schedlab.llm.engine needs {_mod}: pip install 'schedlab[hf]'")

_EXPORTS = {
    "BlockPool": "kv",
    "HostStore": "kv",
    "PagedLlama": "model",
    "SeqInput": "model",
    "TinyLlama": "model",
    "EngineOptions": "serving",
    "EngineResult": "serving",
    "RealEngine": "serving",
    "block_hashes": "serving",
    "request_tokens": "serving",
    "serve": "serving",
    "fit_step_time": "serving",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
