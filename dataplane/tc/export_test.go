package tc

// Recheck lets a test make Sync look for other programs at every call.
var Recheck = &recheck
