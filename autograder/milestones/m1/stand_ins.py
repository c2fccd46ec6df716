"""Milestone 1's stand-ins: a correct, judge-written `softmax`, sent to the worker as source when the
student's softmax group failed, so attention is graded on its own merits. Importing this module registers it."""
import torch

from autograder.grading.checks import stand_ins


def _stand_in_softmax(x, dim=-1):
    m = x.amax(dim=dim, keepdim=True)
    e = torch.exp(x - torch.where(torch.isfinite(m), m, torch.zeros_like(m)))
    s = e.sum(dim=dim, keepdim=True)
    return e / torch.where(s > 0, s, torch.ones_like(s))


stand_ins("m1", softmax=_stand_in_softmax)
