//go:build !linux

package export

// getMark finds no mark where extended attributes are not used.
func getMark(path string) (outputMark, error) { return outputMark{}, errMarksUnsupported }

// setMark cannot mark here: -force then replaces only empty directories,
// and a killed export's staging directory is left for the user.
func setMark(path string, m outputMark) error { return errMarksUnsupported }

// exchange is not available: the output is replaced by two renames.
func exchange(a, b string) error { return errExchangeUnsupported }
