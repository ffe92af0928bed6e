import os

import pytest
import torch


@pytest.fixture
def gen():
    """A generator with a fresh seed every run (printed; CODA_TEST_SEED replays one). The global
    RNG is seeded with the same seed, so draws that do not take the generator (cotangents) replay
    too."""
    env = os.environ.get("CODA_TEST_SEED")
    seed = int(env) if env else torch.seed() % (1 << 31)
    print(f"seed {seed} (replay with CODA_TEST_SEED)")
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)
