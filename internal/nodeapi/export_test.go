package nodeapi

// ReadImage is readImage, for tests.
var ReadImage = readImage
