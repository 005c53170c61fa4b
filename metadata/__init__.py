"""The metadata quorum: metadata records, the MetadataImage, and the quorum controller."""
