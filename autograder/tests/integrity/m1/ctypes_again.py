"""ATTACK: loads ctypes again through the import machinery's own loader, to write the interpreter's memory.

EXPECT: flag=tamper words="already loaded module again"
BASE: reference
"""
import _imp
import importlib.util

_ctypes = _imp.create_dynamic(importlib.util.find_spec("_ctypes"))
