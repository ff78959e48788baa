// placeholder replaced by the metadata reader work
