"""tfsim: predict the throughput of a TensorFlow parameter-server job on W workers.

The work is split into four packages that import in one direction only:

- :mod:`tfprofile` reads TensorFlow traces of a 1-PS/1-worker run into an op DAG;
- :mod:`netcapture` decodes packet captures (TCP, HTTP/2, gRPC) and iperf3 output;
- :mod:`calibration` fits the cluster's bandwidth, flow-control window and overheads;
- :mod:`simulate` replays the DAG for W workers and M servers.

This package holds what they share: the exception types and atomic file output,
and the ``tfsim`` command line.
"""

__version__ = "0.1.0"
