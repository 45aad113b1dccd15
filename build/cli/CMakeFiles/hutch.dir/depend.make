# Empty dependencies file for hutch.
# This may be replaced when dependencies are built.
