-- summary.lua -- busted output handler: busted's plain terminal output, then
-- one closing line "N passed, N failed, N skipped" computed from busted's own
-- counts (errors -- a spec file that fails to load, an error outside a test --
-- count as failures).
return function(options)
  local busted = require 'busted'
  local handler = require 'busted.outputHandlers.plainTerminal'(options)

  busted.subscribe({ 'suite', 'end' }, function()
    local failed = handler.failuresCount + handler.errorsCount
    io.write(string.format('\n%d passed, %d failed, %d skipped\n',
      handler.successesCount, failed, handler.pendingsCount))
    io.flush()
    return nil, true
  end)
  return handler
end
