"""PySpark Python Data Source for pykraft (format "pykraft")."""
