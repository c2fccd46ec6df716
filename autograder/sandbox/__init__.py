"""Isolation: the only code that starts student code (grading slots, the notebook kernel, the trainer).

- slot.py: grading slots (a fork server per slot, one confined worker per need) and how isolation is chosen;
- bwrap.py: bubblewrap command lines (user namespace, no capability, only what is bound);
- confine.py, forkserver.py, guard.py, worker.py: standalone sources run in the sandbox, never imported;
- client.py, protocol.py: the judge's side of a worker (sealed frames, the guard's ledger).
"""
from autograder.sandbox.client import Worker, WorkerLost
from autograder.sandbox.slot import Limits, Sandbox, Slot, make_root, open_slot, remove_root

__all__ = ["Limits", "Sandbox", "Slot", "Worker", "WorkerLost", "make_root", "open_slot", "remove_root"]
