package browser

import "github.com/forkline/forkline/providers"

// The browser is the GUI host of the programs that import this package:
// episode wraps their providers with it when a task has a browser section.
func init() {
	providers.RegisterGUIHost(providers.GUIHost{
		Check: func(g providers.GUI) error { return ConfigFor(DefaultConfig(), g).Validate() },
		Wrap:  func(p providers.Provider) providers.Provider { return Provider(p, DefaultConfig()) },
	})
}
