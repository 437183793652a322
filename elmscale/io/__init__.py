"""Files the library writes and reads: model files (``model_files``), batch scoring of large
files (``batch_scoring``) and cross-validation reports (``reports``)."""
