# CMAKE generated file: DO NOT EDIT!
# Timestamp file for compiler generated dependencies management for hutch_seccomp_profile.
