import os

import pytest
import torch


@pytest.fixture
def gen():
    """A generator with a fresh seed every run (printed; CODA_TEST_SEED replays one)."""
    seed = int(os.environ.get("CODA_TEST_SEED", torch.seed() % (1 << 31)))
    print(f"seed {seed} (replay with CODA_TEST_SEED)")
    return torch.Generator().manual_seed(seed)
