package replay

import (
	"encoding/base64"
	"html/template"
	"io"
	"strings"
)

// WriteHTML writes the report as one self-contained HTML page: the summary,
// then every episode that diverged or failed, with its first divergent step
// side by side (recorded | replayed), the line diff, and both screenshots
// embedded when the step had them. No external resource is referenced, so
// the page can be attached to a CI run as it is.
func WriteHTML(w io.Writer, rep *Report) error {
	return reportTemplate.Execute(w, rep)
}

var reportTemplate = template.Must(template.New("report").Funcs(template.FuncMap{
	"png": func(b []byte) template.URL {
		return template.URL("data:image/png;base64," + base64.StdEncoding.EncodeToString(b))
	},
	"lines": func(s string) []string { return strings.Split(s, "\n") },
	"prefix": func(l string) string {
		switch {
		case strings.HasPrefix(l, "- "):
			return "del"
		case strings.HasPrefix(l, "+ "):
			return "add"
		}
		return "ctx"
	},
	"reward": fmtReward,
}).Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>forkline replay: {{.Dataset}}</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 2em; color: #222; }
h1 { font-size: 1.4em; }
.summary span { display: inline-block; margin-right: 1.5em; padding: .2em .6em; border-radius: 4px; }
.identical { background: #e3f5e1; } .diverged { background: #fde8c8; } .error { background: #f9d4d4; } .none { background: #eee; }
section.episode { border: 1px solid #ccc; border-radius: 6px; margin: 1.5em 0; padding: 1em; }
table.side { width: 100%; border-collapse: collapse; table-layout: fixed; }
table.side th, table.side td { border: 1px solid #ddd; padding: .5em; vertical-align: top; }
pre { white-space: pre-wrap; word-break: break-all; margin: 0; font: 12px/1.35 ui-monospace, monospace; }
pre.diff .del { background: #fde2e2; display: block; } pre.diff .add { background: #dcf5dc; display: block; }
img.shot { max-width: 100%; border: 1px solid #aaa; }
</style>
</head>
<body>
<h1>forkline replay of <code>{{.Dataset}}</code> on <code>{{.Provider}}</code> ({{.Mode}})</h1>
<p class="summary" id="summary">
<span class="identical">identical: <b id="identical">{{.Identical}}</b></span>
<span class="{{if .Diverged}}diverged{{else}}none{{end}}">diverged: <b id="diverged">{{.Diverged}}</b></span>
<span class="{{if .Errored}}error{{else}}none{{end}}">errored: <b id="errored">{{.Errored}}</b></span>
</p>
{{if .Masks}}<details><summary>normalization masks</summary><ul>{{range .Masks}}<li><code>{{.}}</code></li>{{end}}</ul></details>{{end}}
{{range .Episodes}}{{if ne .Status "identical"}}
<section class="episode {{.Status}}" id="ep-{{.EpisodeID}}">
<h2>{{.Status}} — task <code>{{.TaskID}}</code>, episode <code>{{.EpisodeID}}</code></h2>
<p>{{.Matched}} of {{.Steps}} steps matched. Reward: recorded {{reward .RewardRecorded}}, replayed {{reward .RewardReplayed}}{{if .RewardChanged}} <b>(changed)</b>{{end}}.</p>
{{if .Error}}<p class="error">error: {{.Error}}</p>{{end}}
{{with .First}}
<h3>first divergence: step {{.Step}}, {{.Field}}</h3>
<p><code>{{.Action}}</code></p>
<table class="side">
<tr><th>recorded</th><th>replayed</th></tr>
<tr><td><pre class="recorded">{{.Recorded}}</pre></td><td><pre class="replayed">{{.Replayed}}</pre></td></tr>
{{if or .RecordedPNG .ReplayedPNG}}<tr>
<td>{{if .RecordedPNG}}<img class="shot recorded" alt="recorded screenshot" src="{{png .RecordedPNG}}">{{else}}no screenshot{{end}}</td>
<td>{{if .ReplayedPNG}}<img class="shot replayed" alt="replayed screenshot" src="{{png .ReplayedPNG}}">{{else}}no screenshot{{end}}</td>
</tr>{{end}}
</table>
<h4>diff</h4>
<pre class="diff">{{range lines .Diff}}<span class="{{prefix .}}">{{.}}</span>
{{end}}</pre>
{{end}}
</section>
{{end}}{{end}}
</body>
</html>
`))
