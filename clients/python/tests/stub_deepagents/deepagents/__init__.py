"""A stand-in for the deepagents package (not installable here: no PyPI), with the shapes of its
0.7 backend protocol, so the suite checks hutch.deepagents' subclassing branch."""
