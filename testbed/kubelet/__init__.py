"""The test bed's process kubelet: runs the pods bound to its Node as local processes.

Started as a child process by ``testbed.cluster`` (``python -m testbed.kubelet``).
It talks to the API server only through the ``kubernetes`` client with its own
node credentials, so what it does is visible through the API as in a cluster.
"""
