"""Weight averaging and model merging: soups, task arithmetic, TIES-Merging, SWA (issue 30; no plan yet)."""
