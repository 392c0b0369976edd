package schemas

import (
	"reflect"
	"testing"
)

type sized interface{ Size() int64 }

// TestSizeCountsEveryVariableColumn grows each variable-length column of each
// row type in turn and requires the estimate to grow by at least its length:
// a column added to a row type and forgotten by Size fails here, so the
// shard roller and the run summary never under-count it.
func TestSizeCountsEveryVariableColumn(t *testing.T) {
	for _, row := range []sized{&StepRow{}, &EpisodeRow{}, &RewardRow{}, &BlobRow{}} {
		v := reflect.ValueOf(row).Elem()
		empty := row.Size()
		if empty <= 0 {
			t.Errorf("%T: an empty row has size %d; the fixed columns take room", row, empty)
		}
		for i := range v.NumField() {
			f, name := v.Field(i), v.Type().Field(i).Name
			const n = 1000
			switch {
			case f.Kind() == reflect.String:
				f.SetString(string(make([]byte, n)))
			case f.Kind() == reflect.Slice:
				f.Set(reflect.MakeSlice(f.Type(), n, n))
			case f.Kind() == reflect.Pointer && f.Type().Elem().Kind() == reflect.String:
				s := string(make([]byte, n))
				f.Set(reflect.ValueOf(&s))
			default:
				continue // fixed width: inside the allowance
			}
			if got := row.Size(); got < empty+n {
				t.Errorf("%T.%s: %d bytes more in the column, but Size went from %d to %d", row, name, n, empty, got)
			}
			f.Set(reflect.Zero(f.Type()))
		}
	}
}
