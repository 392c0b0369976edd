package hf

import (
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/forkline/forkline/formats/model"
)

// serializeSchema is the ARROW:schema payload the Parquet writer stores.
func serializeSchema(fs model.Features) []byte {
	return flight.SerializeSchema(fs.ArrowSchema(), memory.DefaultAllocator)
}
