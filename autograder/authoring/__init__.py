"""What instructors write and students receive: building student folders and notebooks from the sources
(build.py), the solution markers (markers.py), notebook assembly (notebook.py), and the grading text every
README and notebook states (grading_text.py)."""
