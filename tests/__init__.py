#: An id no execution has, the same at every collection: a test id drawn at random (``uuid4()``
#: in a parametrize) differs between pytest-xdist's workers, which must collect alike.
UNKNOWN_ID = "5d0c7e3a-9b41-4f6e-8a2d-1c3b5e7f9a0d"
