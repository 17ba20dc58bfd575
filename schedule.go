package skiplock

import "github.com/skiplock/skiplock/internal/service"

// schedulerServices returns the recurring-job scheduler.
func (c *Client) schedulerServices() []service.Service { return nil }
