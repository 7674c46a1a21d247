"""The validation lab: emulated clusters on this machine, real runs, and the prediction error."""
