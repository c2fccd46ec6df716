"""ATTACK: reads its own memory through /proc/self/mem, looking for the grader's key.

EXPECT: flag=tamper words="process memory"
BASE: reference
"""
import os

try:
    _fd = os.open("/proc/self/mem", os.O_RDONLY)
except PermissionError:
    _fd = None
