"""Note [stale memory can look like a right answer]
PyTorch's caching allocator hands a freed block to the next request of a fitting size. A model run twice allocates
the same sizes in nearly the same order, so an output buffer of the second run often is the block that held the same
tensor in the first run. A kernel that never writes its output then "returns" the right values, bit for bit. The
verifier cannot be fooled that way (it poisons the outputs it passes in), but a model-level comparison can:
``poison_cached_memory`` releases the allocator's cached blocks and fills what it takes back with NaN, so a run
right after it reads NaN from any buffer nobody wrote.
"""
from __future__ import annotations

import torch


def poison_cached_memory(device: torch.device, fraction: float = 0.5) -> int:
    """Drop the allocator's cached blocks, then take ``fraction`` of the free device memory as one NaN-filled block
    and free it again (it stays cached, so later allocations are carved from it). Returns the bytes poisoned."""
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    free, _ = torch.cuda.mem_get_info(device)
    nbytes = int(free * fraction) // 4 * 4
    block = torch.empty(nbytes // 4, dtype=torch.float32, device=device)
    block.fill_(float("nan"))
    torch.cuda.synchronize(device)
    del block
    return nbytes
