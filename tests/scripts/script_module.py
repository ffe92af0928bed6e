"""The repository root and scripts/*.py loaded as modules, for the tests beside this file."""
import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def script_path(name):
    return os.path.join(ROOT, "scripts", name)


def load(name):
    """scripts/<name>.py as a module."""
    spec = importlib.util.spec_from_file_location(name, script_path(name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
