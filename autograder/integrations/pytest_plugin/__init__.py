"""The hidden grader under pytest: `pytest autograder/integrations/pytest_plugin --submission DIR --milestone m3 [--seed N]`.

One test per check group of the milestone, named after the group, graded by the same engine, in the
same sandbox, with the same seed handling as `course grade` (see plugin.py).
"""
