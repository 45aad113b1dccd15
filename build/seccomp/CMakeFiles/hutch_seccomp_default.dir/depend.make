# Empty dependencies file for hutch_seccomp_default.
# This may be replaced when dependencies are built.
