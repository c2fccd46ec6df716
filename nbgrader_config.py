"""nbgrader settings: this repository is an nbgrader course directory.

source_notebooks/ (written by `course build`) is nbgrader's source folder and assignments/ its release
folder. Everything course-specific (student files kept at autograde, time limits, feedback that shows
no hidden code, the per-check export) comes from course.yaml through autograder/integrations/nbgrade.py.
"""
import os
import sys

_root = os.path.dirname(os.path.abspath(__file__))
if _root not in sys.path:
    sys.path.insert(0, _root)

from autograder.integrations.nbgrade import configure  # noqa: E402

c = get_config()  # noqa: F821 (provided by nbgrader)
configure(c, _root)
