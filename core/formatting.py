"""Formatting shared by every log line of the project (no TensorFlow, no project import)."""


def format_seconds(seconds):
  """A duration as H:MM:SS (negative durations as 0:00:00)."""
  seconds = int(round(max(seconds, 0)))
  return "%d:%02d:%02d" % (seconds // 3600, seconds // 60 % 60, seconds % 60)
