# Empty dependencies file for coldstart.
# This may be replaced when dependencies are built.
