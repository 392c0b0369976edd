package tabletest

import (
	"errors"
	"fmt"
)

// CheckFeatures applies datasets' rule to a table read from a file: the
// features in its "huggingface" metadata are used for a column only if the
// Arrow field they describe equals the file's field (name, nullability,
// type, recursively), so every column must have a feature and every feature
// must equal its column. strictListNames also compares list item names.
func CheckFeatures(t *Table, strictListNames bool) error {
	md, ok := t.Metadata["huggingface"]
	if !ok {
		return errors.New("tabletest: no huggingface metadata")
	}
	want, err := FeatureTypes(md)
	if err != nil {
		return err
	}
	return CheckFields(want, t.Fields, strictListNames)
}

// CheckFields compares expected fields with a file's fields, in order.
func CheckFields(want, got []Type, strictListNames bool) error {
	if len(want) != len(got) {
		return fmt.Errorf("tabletest: %d features for %d columns", len(want), len(got))
	}
	var errs []error
	for i := range want {
		if err := Equal(want[i], got[i], strictListNames); err != nil {
			errs = append(errs, fmt.Errorf("column %d: feature says %s, file has %s: %w", i, want[i], got[i], err))
		}
	}
	return errors.Join(errs...)
}
