"""Ways to grade a class: the batch grader and its platforms (batch/: folders, zips, Gradescope, GitHub
Classroom), nbgrader (nbgrade.py, nbkernel.py) and the hidden checks under pytest (pytest_plugin/)."""
