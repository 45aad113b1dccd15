# Empty dependencies file for hutch_runtime.
# This may be replaced when dependencies are built.
