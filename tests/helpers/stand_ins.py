"""What tests raise in place of what a test process cannot survive."""


class Killed(BaseException):
    """Stands for SIGKILL at the moment a test chooses: a ``BaseException``, so nothing in the command or
    the trainer that catches ``Exception`` may catch it, and no clean-up written for errors runs."""
