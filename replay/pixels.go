package replay

import (
	"bytes"
	"fmt"
	"image"
	"image/png"

	"github.com/forkline/forkline/runtime"
	"github.com/forkline/forkline/schemas"
)

// screenshotDiff compares the screenshots of a recorded and a replayed step
// whose hashes differ. With Config.PixelTolerance, screenshots of the same
// size match when at most that fraction of pixels differ; otherwise any hash
// difference diverges. It fills d when they diverge and leaves it empty when
// they match.
func (c *comparer) screenshotDiff(d *StepDiff, s runtime.Step, was, now schemas.StepRow) {
	var recPNG, repPNG []byte
	switch {
	case was.Screenshot != nil:
		recPNG = was.Screenshot
	case was.ScreenHash != "" && c.blob != nil:
		recPNG, _ = c.blob(was.ScreenHash) // pixels=none stored no bytes: compare by hash only
	}
	if sc := s.Observation.Screenshot; sc != nil {
		repPNG = sc.PNG
	}
	d.Field = "screenshot"
	d.Recorded, d.Replayed = orNone(was.ScreenHash), orNone(now.ScreenHash)
	d.RecordedPNG, d.ReplayedPNG = recPNG, repPNG
	switch {
	case was.ScreenHash == "" || now.ScreenHash == "":
		d.Diff = fmt.Sprintf("screenshot: recorded %s, replayed %s", d.Recorded, d.Replayed)
	case c.cfg.PixelTolerance > 0 && recPNG != nil && repPNG != nil:
		frac, err := pixelDifference(recPNG, repPNG)
		if err != nil {
			d.Diff = "screenshots differ and cannot be compared pixel by pixel: " + err.Error()
			return
		}
		if frac <= c.cfg.PixelTolerance {
			*d = StepDiff{Step: d.Step, Action: d.Action} // within tolerance: a match
			return
		}
		d.Diff = fmt.Sprintf("screenshots differ in %.3f%% of pixels (tolerance %.3f%%)", 100*frac, 100*c.cfg.PixelTolerance)
	default:
		d.Diff = fmt.Sprintf("screenshot sha256 differs: recorded %s, replayed %s", d.Recorded, d.Replayed)
	}
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// pixelDifference decodes two PNGs and returns the fraction of pixels whose
// colour differs. Images of different sizes cannot be compared.
func pixelDifference(a, b []byte) (float64, error) {
	ia, err := png.Decode(bytes.NewReader(a))
	if err != nil {
		return 0, fmt.Errorf("recorded screenshot: %w", err)
	}
	ib, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		return 0, fmt.Errorf("replayed screenshot: %w", err)
	}
	ra, rb := ia.Bounds(), ib.Bounds()
	if ra.Dx() != rb.Dx() || ra.Dy() != rb.Dy() {
		return 0, fmt.Errorf("sizes differ: %dx%d recorded, %dx%d replayed", ra.Dx(), ra.Dy(), rb.Dx(), rb.Dy())
	}
	diff := 0
	for y := 0; y < ra.Dy(); y++ {
		for x := 0; x < ra.Dx(); x++ {
			if !sameColor(ia, ib, ra.Min.X+x, ra.Min.Y+y, rb.Min.X+x, rb.Min.Y+y) {
				diff++
			}
		}
	}
	return float64(diff) / float64(ra.Dx()*ra.Dy()), nil
}

func sameColor(a, b image.Image, ax, ay, bx, by int) bool {
	r1, g1, b1, a1 := a.At(ax, ay).RGBA()
	r2, g2, b2, a2 := b.At(bx, by).RGBA()
	return r1 == r2 && g1 == g2 && b1 == b2 && a1 == a2
}
