"""The application: pipeline files (``pipeline``), running them (``runner``) and the command
line (``cli``)."""
