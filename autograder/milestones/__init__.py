"""Course content for the grader: one folder per milestone, one job per file (checks.py its groups,
answers.py the judge's right answers and the computations of known mistakes, mistakes.py its catalogue,
stand_ins.py correct stand-ins for student callables, recipes.py code run beside the student's), and
reference.py, the judge's Transformer they all share."""
