"""The capstone: training the student's own Transformer on a task and decoding with it (train.py runs it
confined, trainrun.py is what runs inside, bench_model.py times the reference model)."""
