package skiplock

import "github.com/skiplock/skiplock/internal/service"

// retentionServices returns the maintenance services for dead-letter
// retention and jobs_done partitions.
func (c *Client) retentionServices() []service.Service { return nil }
