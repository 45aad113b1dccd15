# Empty dependencies file for hutch_cli_options.
# This may be replaced when dependencies are built.
