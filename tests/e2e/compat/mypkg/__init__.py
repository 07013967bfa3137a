"""A user package beside the scripts of the corpus."""
