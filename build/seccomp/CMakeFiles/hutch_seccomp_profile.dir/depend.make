# Empty dependencies file for hutch_seccomp_profile.
# This may be replaced when dependencies are built.
