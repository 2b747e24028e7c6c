"""The noop agent: does nothing and exits. Its cell scores nothing; a floor for the analyses."""
print("noop: exiting without a submission")
